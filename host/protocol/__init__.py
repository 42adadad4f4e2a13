"""The training protocol: one loop over a device, systems as strategies, failure sources."""
