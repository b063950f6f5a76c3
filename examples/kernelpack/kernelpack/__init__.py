"""kernelpack: NKI kernels (``kernelpack.kernels``, needs ``nki``) and a torch module (``kernelpack.mlp``)."""
