"""The simulator's clients (issue 41 item 2): the queue and txn workloads' processes as asyncio tasks speaking the Kafka
wire protocol, over any asyncio-streams connector, so a run on the deterministic simulator (clusters/sim/) issues the
same operations and writes the same history as a real run (workloads/queue.py, workloads/txn.py), with the client
events of kafka-python's rules (library "sim-kafka-python", history/clients.py).

Entry point: driver.py's `SimWorkloadRun(workload, options, open_connection, rng, bootstrap, history, concurrency,
time_limit_s, rate, spawn)` with `await run.main_phase()` then `await run.final_reads()` (or `run_workload(...)`),
as harness/simulate.py (`kafkaesque sim`) calls it.

Modules: wire.py (one broker connection), client.py (connections and metadata), producer.py (acks=all,
idempotent, transactional), consumer.py (assign mode: positions, fetches, resets, KIP-320 validation), group.py
(subscribe mode: the consumer group protocol), queue.py and txn.py (the workloads' clients, with the real ones'
outcome rules), driver.py (the workloads' processes, their history, the final reads).
"""
