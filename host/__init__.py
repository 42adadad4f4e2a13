"""The host side of trainingcxl, in layers (docs/architecture.md, "Layers"):

* :mod:`.model`: the golden model, the DLRM, GPU timing, data, reference
  recovery and energy;
* :mod:`.driver`: one ``Device`` with every operation, over a transport;
* :mod:`.protocol`: one training loop over a ``Device``, the ladder's systems
  as strategies, the failure sources;
* :mod:`.tools`: campaigns, sweeps, the benchmark and the board commands;
* :mod:`.cli`: the ``trainingcxl`` command line.
"""
