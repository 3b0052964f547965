CMakeFiles/sluice_engine.dir/engine/exec/sink_h5.c.o: \
 /work/main/engine/exec/sink_h5.c /usr/include/stdc-predef.h \
 /usr/include/hdf5/serial/hdf5.h /usr/include/hdf5/serial/H5public.h \
 /usr/include/hdf5/serial/H5pubconf.h \
 /usr/include/hdf5/serial/H5version.h /usr/include/features.h \
 /usr/include/features-time64.h \
 /usr/include/x86_64-linux-gnu/bits/wordsize.h \
 /usr/include/x86_64-linux-gnu/bits/timesize.h \
 /usr/include/x86_64-linux-gnu/sys/cdefs.h \
 /usr/include/x86_64-linux-gnu/bits/long-double.h \
 /usr/include/x86_64-linux-gnu/gnu/stubs.h \
 /usr/include/x86_64-linux-gnu/gnu/stubs-64.h \
 /usr/include/x86_64-linux-gnu/sys/types.h \
 /usr/include/x86_64-linux-gnu/bits/types.h \
 /usr/include/x86_64-linux-gnu/bits/typesizes.h \
 /usr/include/x86_64-linux-gnu/bits/time64.h \
 /usr/include/x86_64-linux-gnu/bits/types/clock_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/clockid_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/time_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/timer_t.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stddef.h \
 /usr/include/x86_64-linux-gnu/bits/stdint-intn.h /usr/include/endian.h \
 /usr/include/x86_64-linux-gnu/bits/endian.h \
 /usr/include/x86_64-linux-gnu/bits/endianness.h \
 /usr/include/x86_64-linux-gnu/bits/byteswap.h \
 /usr/include/x86_64-linux-gnu/bits/uintn-identity.h \
 /usr/include/x86_64-linux-gnu/sys/select.h \
 /usr/include/x86_64-linux-gnu/bits/select.h \
 /usr/include/x86_64-linux-gnu/bits/types/sigset_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__sigset_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_timeval.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_timespec.h \
 /usr/include/x86_64-linux-gnu/bits/pthreadtypes.h \
 /usr/include/x86_64-linux-gnu/bits/thread-shared-types.h \
 /usr/include/x86_64-linux-gnu/bits/pthreadtypes-arch.h \
 /usr/include/x86_64-linux-gnu/bits/atomic_wide_counter.h \
 /usr/include/x86_64-linux-gnu/bits/struct_mutex.h \
 /usr/include/x86_64-linux-gnu/bits/struct_rwlock.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/limits.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/syslimits.h \
 /usr/include/limits.h \
 /usr/include/x86_64-linux-gnu/bits/libc-header-start.h \
 /usr/include/x86_64-linux-gnu/bits/posix1_lim.h \
 /usr/include/x86_64-linux-gnu/bits/local_lim.h \
 /usr/include/linux/limits.h \
 /usr/include/x86_64-linux-gnu/bits/pthread_stack_min-dynamic.h \
 /usr/include/x86_64-linux-gnu/bits/posix2_lim.h \
 /usr/include/x86_64-linux-gnu/bits/xopen_lim.h \
 /usr/include/x86_64-linux-gnu/bits/uio_lim.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdarg.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdint.h /usr/include/stdint.h \
 /usr/include/x86_64-linux-gnu/bits/wchar.h \
 /usr/include/x86_64-linux-gnu/bits/stdint-uintn.h \
 /usr/include/inttypes.h /usr/include/hdf5/serial/H5api_adpt.h \
 /usr/lib/gcc/x86_64-linux-gnu/12/include/stdbool.h \
 /usr/include/hdf5/serial/H5Apublic.h \
 /usr/include/hdf5/serial/H5Ipublic.h \
 /usr/include/hdf5/serial/H5Opublic.h \
 /usr/include/hdf5/serial/H5Lpublic.h \
 /usr/include/hdf5/serial/H5Tpublic.h \
 /usr/include/hdf5/serial/H5ACpublic.h \
 /usr/include/hdf5/serial/H5Cpublic.h \
 /usr/include/hdf5/serial/H5Dpublic.h \
 /usr/include/hdf5/serial/H5Epublic.h /usr/include/stdio.h \
 /usr/include/x86_64-linux-gnu/bits/types/__fpos_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__mbstate_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__fpos64_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__FILE.h \
 /usr/include/x86_64-linux-gnu/bits/types/FILE.h \
 /usr/include/x86_64-linux-gnu/bits/types/struct_FILE.h \
 /usr/include/x86_64-linux-gnu/bits/types/cookie_io_functions_t.h \
 /usr/include/x86_64-linux-gnu/bits/stdio_lim.h \
 /usr/include/x86_64-linux-gnu/bits/floatn.h \
 /usr/include/x86_64-linux-gnu/bits/floatn-common.h \
 /usr/include/hdf5/serial/H5Epubgen.h \
 /usr/include/hdf5/serial/H5Fpublic.h \
 /usr/include/hdf5/serial/H5FDpublic.h \
 /usr/include/hdf5/serial/H5Gpublic.h \
 /usr/include/hdf5/serial/H5MMpublic.h \
 /usr/include/hdf5/serial/H5Ppublic.h \
 /usr/include/hdf5/serial/H5Spublic.h \
 /usr/include/hdf5/serial/H5Zpublic.h \
 /usr/include/hdf5/serial/H5PLpublic.h \
 /usr/include/hdf5/serial/H5Rpublic.h /usr/include/hdf5/serial/H5FDcore.h \
 /usr/include/hdf5/serial/H5FDdirect.h \
 /usr/include/hdf5/serial/H5FDfamily.h \
 /usr/include/hdf5/serial/H5FDhdfs.h /usr/include/hdf5/serial/H5FDlog.h \
 /usr/include/hdf5/serial/H5FDmirror.h /usr/include/hdf5/serial/H5FDmpi.h \
 /usr/include/hdf5/serial/H5FDmpio.h /usr/include/hdf5/serial/H5FDmulti.h \
 /usr/include/hdf5/serial/H5FDros3.h /usr/include/hdf5/serial/H5FDsec2.h \
 /usr/include/hdf5/serial/H5FDsplitter.h \
 /usr/include/hdf5/serial/H5FDstdio.h /usr/include/string.h \
 /usr/include/x86_64-linux-gnu/bits/types/locale_t.h \
 /usr/include/x86_64-linux-gnu/bits/types/__locale_t.h \
 /usr/include/strings.h /work/main/engine/exec/sinks.h \
 /work/main/engine/exec/exec.h /work/main/engine/exec/../plan/plan.h \
 /work/main/engine/exec/../plan/../core/json.h \
 /work/main/engine/exec/../plan/../graph/graph.h \
 /work/main/engine/exec/../plan/../graph/node.h \
 /work/main/engine/exec/../plan/../graph/../backend/backend.h \
 /work/main/engine/exec/../plan/../graph/../backend/../core/status.h \
 /work/main/engine/exec/../plan/../graph/../core/status.h \
 /work/main/engine/exec/../plan/../graph/../core/tensor.h \
 /work/main/engine/exec/../plan/../graph/../pipeline/spec.h \
 /work/main/engine/exec/../plan/../graph/../pipeline/../core/status.h \
 /work/main/engine/exec/../plan/../graph/../pipeline/yaml_tree.h
