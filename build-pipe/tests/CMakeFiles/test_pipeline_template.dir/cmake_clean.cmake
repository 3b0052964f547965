file(REMOVE_RECURSE
  "CMakeFiles/test_pipeline_template.dir/unit/test_pipeline_template.c.o"
  "CMakeFiles/test_pipeline_template.dir/unit/test_pipeline_template.c.o.d"
  "test_pipeline_template"
  "test_pipeline_template.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/test_pipeline_template.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
