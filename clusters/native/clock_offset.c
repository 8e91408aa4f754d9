/* Realtime-only clock offset for one process tree, through LD_PRELOAD.
 *
 * Why our own: Debian's libfaketime 0.9.10 breaks Python (faked monotonic time hangs
 * timed waits; with DONT_FAKE_MONOTONIC=1 time.sleep raises EINVAL; see FACTS.md). This
 * library shifts only the wall clock (CLOCK_REALTIME and its coarse variant,
 * gettimeofday, time) and never touches monotonic or boot time, so sleeps, timeouts and
 * timers keep working while the process believes it is another time.
 *
 * The control file named by KAFKAESQUE_CLOCK_FILE is re-read at most every 10 ms of real
 * monotonic time, so a nemesis changes a running process's clock by rewriting it. It
 * holds one line, in one of two forms:
 *
 *   <offset_ns>                         a fixed offset (signed decimal nanoseconds); a
 *                                       jump is a rewrite of this number
 *   strobe <delta_ns> <period_ns>       the offset flips between 0 and delta_ns every
 *                                       period_ns of monotonic time
 *
 * The strobe is computed here, at every call, from the monotonic clock rather than by a
 * nemesis rewriting the file: flips then land exactly on period boundaries, however
 * slowly the control file is rewritten or re-read. No file or no variable: no offset.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

typedef int (*clock_gettime_fn)(clockid_t, struct timespec *);

/* The current setting, as last read from the control file. Readers copy the fields once
 * per call; a torn read while the file changes mixes an old and a new setting for one
 * call at most, which a clock fault can tolerate. */
static clock_gettime_fn real_clock_gettime;
static volatile int64_t offset_ns;
static volatile int64_t strobe_delta_ns;
static volatile int64_t strobe_period_ns; /* > 0: strobe mode */
static volatile int64_t next_check_ns;

static clock_gettime_fn real(void) {
    if (!real_clock_gettime)
        real_clock_gettime = (clock_gettime_fn)dlsym(RTLD_NEXT, "clock_gettime");
    return real_clock_gettime;
}

static void no_offset(void) {
    strobe_period_ns = 0;
    offset_ns = 0;
}

static void read_control_file(void) {
    const char *path = getenv("KAFKAESQUE_CLOCK_FILE");
    if (!path) {
        no_offset();
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        no_offset();
        return;
    }
    char buf[128];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return; /* empty while being rewritten in place: keep the last setting */
    buf[n] = 0;
    if (strncmp(buf, "strobe", 6) == 0) {
        char *end;
        int64_t delta = strtoll(buf + 6, &end, 10);
        int64_t period = strtoll(end, NULL, 10);
        if (period > 0) {
            strobe_delta_ns = delta;
            strobe_period_ns = period;
            offset_ns = 0;
        }
        return;
    }
    strobe_period_ns = 0;
    offset_ns = strtoll(buf, NULL, 10);
}

static int64_t current_offset(void) {
    struct timespec m;
    if (real()(CLOCK_MONOTONIC, &m) != 0)
        return offset_ns;
    int64_t now = (int64_t)m.tv_sec * 1000000000LL + m.tv_nsec;
    if (now >= next_check_ns) {
        next_check_ns = now + 10000000LL;
        read_control_file();
    }
    int64_t period = strobe_period_ns;
    if (period > 0)
        return (now / period) % 2 ? strobe_delta_ns : 0;
    return offset_ns;
}

static void shift(struct timespec *ts) {
    int64_t t = (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec + current_offset();
    ts->tv_sec = t / 1000000000LL;
    ts->tv_nsec = t % 1000000000LL;
    if (ts->tv_nsec < 0) {
        ts->tv_nsec += 1000000000LL;
        ts->tv_sec -= 1;
    }
}

int clock_gettime(clockid_t clk, struct timespec *ts) {
    int r = real()(clk, ts);
    if (r == 0 && (clk == CLOCK_REALTIME || clk == CLOCK_REALTIME_COARSE))
        shift(ts);
    return r;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
    (void)tz;
    struct timespec ts;
    int r = clock_gettime(CLOCK_REALTIME, &ts);
    if (r == 0 && tv) {
        tv->tv_sec = ts.tv_sec;
        tv->tv_usec = ts.tv_nsec / 1000;
    }
    return r;
}

time_t time(time_t *out) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return (time_t)-1;
    if (out)
        *out = ts.tv_sec;
    return ts.tv_sec;
}
