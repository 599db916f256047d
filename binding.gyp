{
  "targets": [
    {
      "target_name": "proctree",
      "sources": [
        "native/binding.cc",
        "native/compat/glibcxx_3_4_29.cc",
        "native/kernel/broker_client.cc",
        "native/kernel/broker_protocol.cc",
        "native/kernel/cgroup.cc",
        "native/kernel/cgroup_sweep.cc",
        "native/kernel/child.cc",
        "native/kernel/clone.cc",
        "native/kernel/guardian_launch.cc",
        "native/kernel/limits.cc",
        "native/kernel/members.cc",
        "native/kernel/pidfd.cc",
        "native/kernel/probe.cc",
        "native/kernel/proc_scan.cc",
        "native/kernel/procfs.cc",
        "native/kernel/pty.cc",
        "native/kernel/socket_tables.cc",
        "native/kernel/sockets.cc",
        "native/kernel/spawn.cc",
        "native/kernel/stdio_fds.cc",
        "native/kernel/systemd_probe.cc",
        "native/ladder/cgroup_confinement.cc",
        "native/ladder/confinement.cc",
        "native/ladder/ladder.cc",
        "native/ladder/pidns_confinement.cc",
        "native/ladder/session_confinement.cc",
        "native/ladder/shim_tree.cc",
        "native/loop/call.cc",
        "native/loop/environment.cc",
        "native/loop/environment_broker.cc",
        "native/loop/environment_stops.cc",
        "native/loop/errno_name.cc",
        "native/loop/file_writer.cc",
        "native/loop/ports_worker.cc",
        "native/loop/streams.cc",
        "native/loop/reactor.cc",
        "native/loop/spawner.cc",
        "native/loop/subtrees.cc",
        "native/loop/thread.cc",
        "native/loop/timers.cc",
        "native/loop/waiter.cc"
      ],
      "include_dirs": ["native", "<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fno-exceptions", "-fvisibility=hidden", "-fstack-protector-strong", "-fno-tree-loop-distribute-patterns", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "cflags": ["-fvisibility=hidden", "-fstack-protector-strong"],
      "conditions": [
        ["OS!='linux'", { "sources": [] }],
        ["'<!(echo $PROCTREE_WERROR)'=='1'", { "cflags_cc": ["-Werror"] }]
      ]
    },
    {
      "target_name": "proctree-helper",
      "type": "executable",
      "include_dirs": ["native"],
      "sources": [
        "native/helper/broker.cc",
        "native/helper/guardian.cc",
        "native/helper/main.cc",
        "native/helper/shim.cc",
        "native/kernel/broker_protocol.cc",
        "native/kernel/cgroup.cc",
        "native/kernel/cgroup_sweep.cc",
        "native/kernel/child.cc",
        "native/kernel/clone.cc",
        "native/kernel/members.cc",
        "native/kernel/pidfd.cc",
        "native/kernel/proc_scan.cc",
        "native/kernel/procfs.cc",
        "native/kernel/pty.cc",
        "native/kernel/spawn.cc",
        "native/kernel/stdio_fds.cc"
      ],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fno-exceptions", "-fstack-protector-strong", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "conditions": [
        ["'<!(echo $PROCTREE_WERROR)'=='1'", { "cflags_cc": ["-Werror"] }],
        ["'<!(echo $PROCTREE_STATIC_HELPER)'=='1'", { "ldflags": ["-static"] }]
      ]
    }
  ]
}
