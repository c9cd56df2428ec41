// The mig-parted config the device-plugin tests apply to a simulated 3xA100-80GB machine:
// GPU 0 whole, GPU 1 shared, GPU 2 MIG; "second" re-lays GPU 2 with a profile "first" lacks
// (2g.20gb) and drops one it had (3g.40gb).
#pragma once

namespace gpuslice::k8s::testing {

inline constexpr char kTwoMigLayouts[] = R"(version: v1
mig-configs:
  first:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 1
        "1g.10gb": 2
  second:
    - devices: [0, 1]
      mig-enabled: false
    - devices: [2]
      mig-enabled: true
      mig-devices:
        "2g.20gb": 2
        "1g.10gb": 3
)";

}  // namespace gpuslice::k8s::testing
