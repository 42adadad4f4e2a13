"""The cocotb jobs and benches that the runner starts inside a simulator (entry points)."""
