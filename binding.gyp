{
  "targets": [
    {
      "target_name": "proctree",
      "sources": [
        "native/binding.cc",
        "native/call.cc",
        "native/cgroup.cc",
        "native/cgroup_call.cc",
        "native/clone_trampoline.cc",
        "native/descendants.cc",
        "native/guardian.cc",
        "native/guardian_start.cc",
        "native/pgroup_call.cc",
        "native/pidfd.cc",
        "native/probe.cc",
        "native/procfs.cc",
        "native/reactor.cc",
        "native/registry.cc",
        "native/shim_call.cc",
        "native/spawn.cc",
        "native/stdio.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fno-exceptions", "-fvisibility=hidden", "-fstack-protector-strong", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "cflags": ["-fvisibility=hidden", "-fstack-protector-strong"],
      "conditions": [
        ["OS!='linux'", { "sources": [] }],
        ["'<!(echo $PROCTREE_WERROR)'=='1'", { "cflags_cc": ["-Werror"] }]
      ]
    },
    {
      "target_name": "proctree-helper",
      "type": "executable",
      "sources": [
        "native/helper/main.cc",
        "native/helper/shim.cc",
        "native/cgroup.cc",
        "native/descendants.cc",
        "native/guardian.cc",
        "native/pidfd.cc",
        "native/procfs.cc"
      ],
      "cflags_cc!": ["-fno-exceptions", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-fno-exceptions", "-fstack-protector-strong", "-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"],
      "conditions": [
        ["'<!(echo $PROCTREE_WERROR)'=='1'", { "cflags_cc": ["-Werror"] }]
      ]
    }
  ]
}
