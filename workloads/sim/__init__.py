"""The simulator's clients (issue 41 item 2): the queue and txn workloads' processes as asyncio tasks speaking the
Kafka wire protocol, over any asyncio-streams connector, so a run on the deterministic simulator (clusters/sim/)
issues the same operations and writes the same history as a real run (workloads/queue.py, workloads/txn.py).

Modules: wire.py (one broker connection), client.py (connections and metadata), producer.py (acks=all,
idempotent, transactional), consumer.py (assign mode: positions, fetches, resets), group.py (subscribe mode:
the consumer group protocol), driver.py (the workloads' processes, their history, the final reads).
"""
