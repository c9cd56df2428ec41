// gpuslice/k8s/labels.h: Kubernetes node labels describing a node's GPUs, and the Node Feature
// Discovery (NFD) feature file that publishes them.
//
// NodeLabels names things as NVIDIA GPU Feature Discovery (GFD) does
// (NVIDIA/k8s-device-plugin internal/lm/resource.go and mig-strategy.go), so that node selectors
// and affinities written for GFD keep working on gpuslice nodes:
//   nvidia.com/gpu.product        the product name with ' ' → '-' ("NVIDIA-H100-80GB-HBM3")
//   nvidia.com/gpu.count          GPUs of that product on the node
//   nvidia.com/gpu.memory         that product's memory in MiB (left out when unknown, 0)
//   nvidia.com/mig.capable        "true" when some GPU has MIG (enabled now, or a MIG model in
//                                 the catalog), else "false"
//   nvidia.com/mig.strategy       "mixed": MIG devices are offered as nvidia.com/mig-<profile>
//   nvidia.com/mig-<p>.count      per MIG profile present (<p> as in MigResourceName: '+' → '.'):
//   nvidia.com/mig-<p>.memory       the number of MIG devices, their memory (MiB), the GI's and
//   nvidia.com/mig-<p>.slices.gi    the CI's compute slices, and the product
//   nvidia.com/mig-<p>.slices.ci    "<GPU product>-MIG-<p>" as GFD writes it
//   nvidia.com/mig-<p>.product
//   nvidia.com/gpu.sharing-strategy "none", or "gpuslice" when some GPU is offered in shares
//   gpuslice.io/gpu-share.units   units per shared GPU   } only when some GPU is offered in
//   gpuslice.io/gpu-share.gpus    GPUs offered in shares } shares (gpuslice.io/gpu-share)
//
// Choices where GFD is not a model to follow:
//   * A node mixing products: GFD warns ("Multiple device types detected") and labels one of them,
//     whichever its map iteration gives last (a MIG-disabled one wins over a MIG-enabled one).
//     gpuslice is deterministic: the product, count and memory are those of the first GPU (lowest
//     index); gpu.count counts the GPUs with that same product, as GFD's does.
//   * MIG profiles: only MIG devices that are offered (compute instance spanning its GPU instance,
//     as ResourcesOf) are counted, so the labels agree with the node's allocatable resources. A
//     profile's memory, slices and product are those of its first device (lowest GPU index, then
//     placement start). A MIG-enabled GPU with no instances adds no profile.
//   * Health is not reflected: labels describe the hardware, kubelet's allocatable says what is
//     usable now.
//   * A node without GPUs gets no labels at all (GFD's empty labeler).
// Every value is a valid Kubernetes label value (at most 63 characters of
// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, see SanitizeLabelValue) and every name a valid label
// name (IsValidLabelName); a label whose value sanitises to nothing, or whose name is not valid
// (a profile name no label can carry), is left out.
//
// NfdFeatureFile writes the labels for NFD's "local" feature source, as documented in
// kubernetes-sigs/node-feature-discovery@03ae1ac2eaba2fd4cab4cf925707ed262abc3f8d
// docs/usage/customization-guide.md ("Local feature source"):
//   * nfd-worker reads every file in /etc/kubernetes/node-feature-discovery/features.d/, one
//     `<key>[=<value>]` per line (a missing value means "true"); lines starting with '#' are
//     comments; a file over 64 kB is ignored;
//   * a name with a namespace (`nvidia.com/gpu.count`) becomes that node label as written; an
//     unprefixed name is prefixed with feature.node.kubernetes.io/ (we write none). nfd-master
//     allows every label namespace except kubernetes.io and *.kubernetes.io unless told otherwise
//     (`-deny-label-ns`; a denied one is re-allowed with `-extra-label-ns=nvidia.com,gpuslice.io`,
//     docs/reference/master-commandline-reference.md);
//   * `# +expiry-time=<RFC 3339>` makes the lines after it count only until that time (evaluated
//     at each re-discovery, so a node keeps stale labels if nobody rewrites the file: the writer
//     refreshes the time every round, and a stopped writer's labels then go away);
//   * "NFD ignores dot files": the temporary file WriteFeatureFile renames into place is one.
//
// Thread-safety: all functions are safe to call concurrently (WriteFeatureFile on distinct paths;
// on one path the last rename wins, and readers never see a torn file).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "gpuslice/hw/catalog.h"
#include "gpuslice/k8s/devices.h"

namespace gpuslice::k8s {

inline constexpr std::string_view kNfdFeaturesDir =
    "/etc/kubernetes/node-feature-discovery/features.d";
inline constexpr std::string_view kSharingStrategyLabel = "nvidia.com/gpu.sharing-strategy";
inline constexpr std::string_view kShareUnitsLabel = "gpuslice.io/gpu-share.units";
inline constexpr std::string_view kShareGpusLabel = "gpuslice.io/gpu-share.gpus";
// NFD skips a feature file larger than this.
inline constexpr size_t kNfdFeatureFileLimit = 64 * 1024;

using Labels = std::map<std::string, std::string>;

// The node's labels (see above). Whether a MIG-disabled GPU can do MIG is looked up in `catalog`
// by the GPU's catalog model id, then its product name; the first form uses the built-in catalog.
// Pure and deterministic.
Labels NodeLabels(const NodeSnapshot& node, const SharingConfig& sharing);
Labels NodeLabels(const NodeSnapshot& node, const SharingConfig& sharing,
                  const hw::Catalog& catalog);

// Turns any text into a valid label value: ' ' and every character outside [-A-Za-z0-9_.] become
// '-', then it is cut to 63 characters and stripped of leading and trailing non-alphanumerics.
// The result may be empty (no valid value can be made of it).
std::string SanitizeLabelValue(std::string_view text);

// A valid label value: empty, or at most 63 characters, [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?.
bool IsValidLabelValue(std::string_view value);

// A valid label name: an optional prefix (a DNS subdomain of at most 253 characters: dot-separated
// lower-case [a-z0-9]([-a-z0-9]*[a-z0-9])?) and '/', then a name part that is a non-empty valid
// label value.
bool IsValidLabelName(std::string_view name);

// The NFD local feature file for `labels`: a comment header, the expiry directive when `expires`
// is given (UTC, "# +expiry-time=2026-07-29T11:22:33Z"), then one `name=value` line per label in
// name order. A label with an invalid name or value is left out (NodeLabels gives none). Pure.
std::string NfdFeatureFile(
    const Labels& labels,
    std::optional<std::chrono::system_clock::time_point> expires = std::nullopt);

// Replaces the file at `path` with `text` atomically: writes a temporary dot file in the same
// directory (".<name>.tmp-XXXXXX", which NFD ignores), fsyncs it, makes it mode 0644, renames it
// over `path` and fsyncs the directory. Creates nothing but the file: a missing directory is
// NotFound. Other failures (permissions, a full disk, `path` naming a directory) are errors that
// name the path and the system's reason; the temporary file is removed on failure.
absl::Status WriteFeatureFile(const std::string& path, const std::string& text);

}  // namespace gpuslice::k8s
