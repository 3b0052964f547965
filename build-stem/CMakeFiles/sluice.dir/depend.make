# Empty dependencies file for sluice.
# This may be replaced when dependencies are built.
