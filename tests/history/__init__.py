"""Jepsen-style history checking (issue 18): a recorder of client operations, a workload with a
nemesis, and a checker of the recorded history. See docs/guarantees.md."""
