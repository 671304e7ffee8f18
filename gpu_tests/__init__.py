"""GPU tests (`nox -s gpu`): real attention kernels on packed THD inputs. See README.md here."""
