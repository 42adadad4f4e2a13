"""The tools above the protocol: failure plans, parallel runs, campaigns, sweeps, bench, boards."""
