"""The lab: simulated GPU hosts built from host specs, reached over real SSH."""
