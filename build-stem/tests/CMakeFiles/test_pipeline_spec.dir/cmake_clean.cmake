file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_spec.dir/unit/test_pipeline_spec.c.o"
  "CMakeFiles/test_pipeline_spec.dir/unit/test_pipeline_spec.c.o.d"
  "test_pipeline_spec"
  "test_pipeline_spec.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_pipeline_spec.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
