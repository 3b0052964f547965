# Empty compiler generated dependencies file for test_pipeline_yaml.
# This may be replaced when dependencies are built.
