"""The run layer: tasks, the runners that run them (one device, a pool of devices, a
process killed and resumed), and their fan-out on a cluster with a journal
(docs/architecture.md, "From a command to a record")."""
