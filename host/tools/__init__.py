"""What the commands share: argument types, failure plans, the ladder's runs and
analysis, output checks and provenance."""
