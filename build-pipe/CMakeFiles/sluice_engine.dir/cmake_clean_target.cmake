file(REMOVE_RECURSE
  "libsluice_engine.a"
)
