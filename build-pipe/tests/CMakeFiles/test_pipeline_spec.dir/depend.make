# Empty dependencies file for test_pipeline_spec.
# This may be replaced when dependencies are built.
