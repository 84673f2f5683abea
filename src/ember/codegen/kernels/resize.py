"""Resampling kernels: Resize (every mode and coordinate transformation) and GridSample."""
