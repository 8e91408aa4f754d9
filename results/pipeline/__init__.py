"""The Spark pipeline over stored histories (DESIGN.md "Layout": results/ holds it).

    kafkaesque pipeline ingest  STORE|CAMPAIGN|RUN...   histories -> Parquet (once)
    kafkaesque pipeline check                           the queue checks as Spark DataFrame jobs
    kafkaesque pipeline summarize                       campaign aggregates as JSON

Modules: `ingest` (JSONL -> Parquet, pyarrow, no JVM needed), `session` (one SparkSession per
command, Java found and Spark's logs kept out of the terminal), `queue_checks` (the set-based
queue checks, equal to checkers/queue.py's verdicts and counts), `summarize` (aggregates),
`cli` (the typer commands).
"""


class PipelineError(RuntimeError):
    """A user-fixable problem (no Java, bad path, no runs): the message is one sentence naming the fix."""
