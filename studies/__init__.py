"""The project's studies of its own power: how often the harness finds what it should. The mutation
study (mutation.py: each mutant of clusters/mutants.py run under fault plans, docs/MUTATION.md) and the
detection study (detection.py: each historic flaw variant under each fault plan, docs/DETECTION.md)."""
