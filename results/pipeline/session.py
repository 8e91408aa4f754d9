"""One SparkSession per pipeline command: Java found first, Spark's own logs kept out of the terminal.

Spark's JVM writes its log4j output and launcher messages to the stderr it inherits. The user
wants one line per problem and a rich progress display, so unless --spark-logs is given the
JVM is started with fds 1 and 2 pointing at a log file under <warehouse>/spark-logs/ (the
JVM inherits them at launch; ours are restored right after), log4j's root level is ERROR,
and the console progress bar and the web UI are off.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

from kafkaesque_harness.history.extras import need
from kafkaesque_harness.results.pipeline import PipelineError

MIN_JAVA = 17  # Spark 4 runs on Java 17 or newer
JAVA_FIX = "install it (apt-get install openjdk-17-jre-headless) or set JAVA_HOME to a Java 17+ install"

LOG4J2_QUIET = """\
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss.SSS}} %p %c{{1}}: %m%n
"""


def find_java() -> tuple[str, int]:
    """(path of the java binary, major version); sets JAVA_HOME when only PATH had it."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        raise PipelineError(f"Spark needs Java {MIN_JAVA} or newer and found none ({where}); {JAVA_FIX}.")
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PipelineError(f"`{java} -version` failed ({e}); {JAVA_FIX}.") from None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    major = int(m.group(1)) if m else 0
    if major == 1 and m and m.group(2):  # "1.8.0" style: Java 8
        major = int(m.group(2))
    if major < MIN_JAVA:
        raise PipelineError(f"Spark needs Java {MIN_JAVA} or newer but {java} is Java {major or '?'}; {JAVA_FIX}.")
    if not home:  # spark-submit wants JAVA_HOME; /usr/bin/java is a symlink into the JDK
        os.environ["JAVA_HOME"] = str(Path(os.path.realpath(java)).parent.parent)
    return java, major


@contextmanager
def _fds_to(path: Path | None) -> Iterator[None]:
    """Point fds 1 and 2 at `path` while the JVM is launched (it inherits them); restore ours after."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (*saved, fd):
            os.close(f)


STANDALONE_CORES = 2  # spark.cores.max of a job on a spark:// master


def _cores(master: str) -> int:
    """The cores a job gets on `master`: local[N] N, local[*] every core, local one; a standalone master's
    STANDALONE_CORES. Shuffles get two partitions a core: 8 on 2 cores made the 1M-op check about a tenth
    slower than 4 (many small partitions, each with its own files and tasks)."""
    if master.startswith("local"):
        n = master[len("local["):-1] if master.startswith("local[") and master.endswith("]") else "1"
        n = n.split(",")[0]  # local[N,F]: F is the task retries
        if n == "*":
            return os.cpu_count() or 1
        return max(1, int(n)) if n.isdigit() else 1
    return STANDALONE_CORES


def _is_loopback_master(master: str) -> bool:
    host = urlparse(master).hostname if master.startswith("spark://") else None
    return host in ("127.0.0.1", "localhost", "::1")


def start_session(master: str, warehouse: Path, command: str, spark_logs: bool = False,
                  extra_conf: dict[str, str] | None = None):
    """A SparkSession for one command; returns (session, path of Spark's log file or None)."""
    find_java()
    # imported late: the CLI must start without a JVM (and without the spark extra)
    SparkSession = need("pyspark.sql", "spark", "the Spark pipeline").SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # only DataFrame jobs, but keep workers on our Python
    log_dir = warehouse / "spark-logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log4j = log_dir / "log4j2.properties"
    log4j.write_text(LOG4J2_QUIET.format(level="warn" if spark_logs else "error"))
    log_file = None if spark_logs else log_dir / f"{command}-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"
    builder = (SparkSession.builder.master(master).appName(f"kafkaesque-pipeline-{command}")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.memory", "2g")  # local mode: the executors live in this heap too
               .config("spark.executor.memory", "512m")
               .config("spark.sql.shuffle.partitions", str(2 * _cores(master)))
               # Broadcast joins intermittently ran the 1 GB driver out of heap on a few thousand rows
               # (Spark 4.3, local[2], the summarize plan); sort-merge joins are steady.
               .config("spark.sql.autoBroadcastJoinThreshold", "-1")
               # partition values are run ids and campaign names: strings, even when they look numeric
               .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
               .config("spark.driver.extraJavaOptions", java_opts)
               .config("spark.executor.extraJavaOptions", java_opts))
    if master.startswith("spark://"):
        builder = builder.config("spark.cores.max", str(STANDALONE_CORES))
        if _is_loopback_master(master):  # executors must reach the driver on the loopback address too
            builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for k, v in (extra_conf or {}).items():
        builder = builder.config(k, v)
    try:
        with _fds_to(log_file):
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("WARN" if spark_logs else "ERROR")
    except Exception as e:  # noqa: BLE001 - a JVM that does not start is the user's to fix, in one line
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        where = f"; Spark's log: {log_file}" if log_file else ""
        raise PipelineError(f"Spark did not start with master {master} ({first[:200]}); check --spark-master "
                            f"and Java{where}.") from None
    return spark, log_file
