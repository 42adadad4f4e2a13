"""The host applications that run inside a simulator: the cocotb entry points behind
``train``, ``lookup-demo``, ``bench-update``, ``fuzz`` and ``train --target
sim-board``. Each reads its job (:mod:`trainingcxl.host.jobs`) and writes its record
as JSON; :func:`.launch.launch` starts one and collects what it wrote."""
