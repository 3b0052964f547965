file(REMOVE_RECURSE
  "CMakeFiles/sluice.dir/engine/cli/cli_common.c.o"
  "CMakeFiles/sluice.dir/engine/cli/cli_common.c.o.d"
  "CMakeFiles/sluice.dir/engine/cli/cmd_info.c.o"
  "CMakeFiles/sluice.dir/engine/cli/cmd_info.c.o.d"
  "CMakeFiles/sluice.dir/engine/cli/cmd_plan.c.o"
  "CMakeFiles/sluice.dir/engine/cli/cmd_plan.c.o.d"
  "CMakeFiles/sluice.dir/engine/cli/cmd_run.c.o"
  "CMakeFiles/sluice.dir/engine/cli/cmd_run.c.o.d"
  "CMakeFiles/sluice.dir/engine/cli/main.c.o"
  "CMakeFiles/sluice.dir/engine/cli/main.c.o.d"
  "sluice"
  "sluice.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/sluice.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
