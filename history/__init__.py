"""The ground floor: the op schema, history files, and the standard fault record.

Imports nothing of the project; every other package may import it (docs/ARCHITECTURE.md).
"""

from kafkaesque_harness.history.clients import CLIENT_EVENTS, client_events, client_id, process_of_client
from kafkaesque_harness.history.faults import (
                            BEYOND_BUDGET,
                            FAULTS_KEY,
                            HEAL_F,
                            FaultRecord,
                            FaultWindow,
                            FaultWindows,
                            beyond_budget_time,
                            fault_records,
                            fault_windows,
                            marks_beyond_budget,
                            records_in,
)
from kafkaesque_harness.history.files import HistoryFile, HistoryWriter, gc_paused, iter_history, read_history
from kafkaesque_harness.history.ops import (
                            FAIL,
                            INFO,
                            INVOKE,
                            NEMESIS,
                            OK,
                            OP_TYPES,
                            History,
                            HistoryFormatError,
                            Op,
                            pair_ops,
                            pair_stream,
)

__all__ = ["BEYOND_BUDGET", "CLIENT_EVENTS", "FAIL", "FAULTS_KEY", "HEAL_F", "INFO", "INVOKE", "NEMESIS", "OK", "OP_TYPES",
           "FaultRecord", "FaultWindow", "FaultWindows", "History", "HistoryFile", "HistoryFormatError", "HistoryWriter", "Op",
           "beyond_budget_time", "client_events", "client_id", "fault_records", "fault_windows", "gc_paused", "iter_history", "marks_beyond_budget",
           "pair_ops", "pair_stream", "process_of_client",
           "read_history", "records_in"]
