
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/engine/backend/backend.c" "CMakeFiles/sluice_engine.dir/engine/backend/backend.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/backend/backend.c.o.d"
  "/work/main/engine/backend/cpu/cpu_backend.c" "CMakeFiles/sluice_engine.dir/engine/backend/cpu/cpu_backend.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/backend/cpu/cpu_backend.c.o.d"
  "/work/main/engine/core/json.c" "CMakeFiles/sluice_engine.dir/engine/core/json.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/core/json.c.o.d"
  "/work/main/engine/core/progress.c" "CMakeFiles/sluice_engine.dir/engine/core/progress.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/core/progress.c.o.d"
  "/work/main/engine/core/status.c" "CMakeFiles/sluice_engine.dir/engine/core/status.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/core/status.c.o.d"
  "/work/main/engine/core/tensor.c" "CMakeFiles/sluice_engine.dir/engine/core/tensor.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/core/tensor.c.o.d"
  "/work/main/engine/core/util.c" "CMakeFiles/sluice_engine.dir/engine/core/util.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/core/util.c.o.d"
  "/work/main/engine/exec/exec.c" "CMakeFiles/sluice_engine.dir/engine/exec/exec.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/exec/exec.c.o.d"
  "/work/main/engine/exec/pool.c" "CMakeFiles/sluice_engine.dir/engine/exec/pool.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/exec/pool.c.o.d"
  "/work/main/engine/exec/report.c" "CMakeFiles/sluice_engine.dir/engine/exec/report.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/exec/report.c.o.d"
  "/work/main/engine/exec/sink_h5.c" "CMakeFiles/sluice_engine.dir/engine/exec/sink_h5.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/exec/sink_h5.c.o.d"
  "/work/main/engine/exec/sink_png.c" "CMakeFiles/sluice_engine.dir/engine/exec/sink_png.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/exec/sink_png.c.o.d"
  "/work/main/engine/graph/graph.c" "CMakeFiles/sluice_engine.dir/engine/graph/graph.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/graph/graph.c.o.d"
  "/work/main/engine/graph/params.c" "CMakeFiles/sluice_engine.dir/engine/graph/params.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/graph/params.c.o.d"
  "/work/main/engine/pipeline/params.c" "CMakeFiles/sluice_engine.dir/engine/pipeline/params.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/pipeline/params.c.o.d"
  "/work/main/engine/pipeline/render.c" "CMakeFiles/sluice_engine.dir/engine/pipeline/render.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/pipeline/render.c.o.d"
  "/work/main/engine/pipeline/spec.c" "CMakeFiles/sluice_engine.dir/engine/pipeline/spec.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/pipeline/spec.c.o.d"
  "/work/main/engine/pipeline/subst.c" "CMakeFiles/sluice_engine.dir/engine/pipeline/subst.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/pipeline/subst.c.o.d"
  "/work/main/engine/pipeline/yaml_tree.c" "CMakeFiles/sluice_engine.dir/engine/pipeline/yaml_tree.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/pipeline/yaml_tree.c.o.d"
  "/work/main/engine/plan/plan.c" "CMakeFiles/sluice_engine.dir/engine/plan/plan.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/plan/plan.c.o.d"
  "/work/main/engine/plan/plan_print.c" "CMakeFiles/sluice_engine.dir/engine/plan/plan_print.c.o" "gcc" "CMakeFiles/sluice_engine.dir/engine/plan/plan_print.c.o.d"
  "/work/main/nodes/basic/basic_nodes.c" "CMakeFiles/sluice_engine.dir/nodes/basic/basic_nodes.c.o" "gcc" "CMakeFiles/sluice_engine.dir/nodes/basic/basic_nodes.c.o.d"
  "/work/main/nodes/registry.c" "CMakeFiles/sluice_engine.dir/nodes/registry.c.o" "gcc" "CMakeFiles/sluice_engine.dir/nodes/registry.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
