file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_yaml.dir/unit/test_pipeline_yaml.c.o"
  "CMakeFiles/test_pipeline_yaml.dir/unit/test_pipeline_yaml.c.o.d"
  "test_pipeline_yaml"
  "test_pipeline_yaml.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_pipeline_yaml.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
