"""Spectral kernels: DFT and STFT."""
