"""Host side of trainingcxl: configuration, golden model, data and the command line."""
