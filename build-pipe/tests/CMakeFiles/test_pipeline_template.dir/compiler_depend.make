# Empty compiler generated dependencies file for test_pipeline_template.
# This may be replaced when dependencies are built.
