# Empty dependencies file for sluice_engine.
# This may be replaced when dependencies are built.
