"""The vendor-tool shims installed on lab hosts; shimlib is also imported by the lab itself."""
