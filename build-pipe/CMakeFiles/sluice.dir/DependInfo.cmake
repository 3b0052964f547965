
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/engine/cli/cli_common.c" "CMakeFiles/sluice.dir/engine/cli/cli_common.c.o" "gcc" "CMakeFiles/sluice.dir/engine/cli/cli_common.c.o.d"
  "/work/main/engine/cli/cmd_info.c" "CMakeFiles/sluice.dir/engine/cli/cmd_info.c.o" "gcc" "CMakeFiles/sluice.dir/engine/cli/cmd_info.c.o.d"
  "/work/main/engine/cli/cmd_plan.c" "CMakeFiles/sluice.dir/engine/cli/cmd_plan.c.o" "gcc" "CMakeFiles/sluice.dir/engine/cli/cmd_plan.c.o.d"
  "/work/main/engine/cli/cmd_run.c" "CMakeFiles/sluice.dir/engine/cli/cmd_run.c.o" "gcc" "CMakeFiles/sluice.dir/engine/cli/cmd_run.c.o.d"
  "/work/main/engine/cli/main.c" "CMakeFiles/sluice.dir/engine/cli/main.c.o" "gcc" "CMakeFiles/sluice.dir/engine/cli/main.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  "/work/main/build-pipe/CMakeFiles/sluice_engine.dir/DependInfo.cmake"
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
