// Times Porcupine's CheckEvents on the files that benchmarks/bench_linearizable.py names, so the two
// checkers are measured in the same run on the same files. Not part of Porcupine: the benchmark copies
// this file into a scratch copy of Porcupine's source (package porcupine, beside its own tests, whose
// parseJepsenLog, parseKvLog, etcdModel and kvModel it reuses) and builds it there with `go test -c`.
//
// Input, from the environment:
//   KAFKAESQUE_FILES   comma-separated model:path pairs, model "etcd" or "kv"
//   KAFKAESQUE_MIN_MS  repeat each check until this many milliseconds have passed (as -benchtime does)
// Output, one line per file: "RESULT <path> <nanoseconds per check> <checks> <verdict true/false>".
// Parsing is excluded from the time, as in Porcupine's own benchmarks.

package porcupine

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestKafkaesqueTiming(t *testing.T) {
	files := os.Getenv("KAFKAESQUE_FILES")
	if files == "" {
		t.Skip("KAFKAESQUE_FILES is not set: nothing to time")
	}
	minMs, err := strconv.Atoi(os.Getenv("KAFKAESQUE_MIN_MS"))
	if err != nil {
		t.Fatalf("KAFKAESQUE_MIN_MS must be a whole number of milliseconds: %v", err)
	}
	for _, pair := range strings.Split(files, ",") {
		kind, path, found := strings.Cut(pair, ":")
		if !found {
			t.Fatalf("%q is not model:path", pair)
		}
		var events []Event
		var model Model
		switch kind {
		case "etcd":
			events, model = parseJepsenLog(path), etcdModel
		case "kv":
			events, model = parseKvLog(path), kvModel
		default:
			t.Fatalf("model %q is neither etcd nor kv", kind)
		}
		verdict := CheckEvents(model, events) // warm-up, and the verdict
		runs := 0
		start := time.Now()
		for runs == 0 || time.Since(start) < time.Duration(minMs)*time.Millisecond {
			CheckEvents(model, events)
			runs++
		}
		perCheck := time.Since(start).Nanoseconds() / int64(runs)
		fmt.Printf("RESULT %s %d %d %t\n", path, perCheck, runs, verdict)
	}
}
