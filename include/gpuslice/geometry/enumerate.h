// gpuslice/geometry/enumerate.h
//
// Exhaustive enumeration of the layouts of one GPU model: every valid layout, the maximal ones
// (nothing more fits), and the distinct profile multisets among them. The search is complete: it
// walks the placement units left to right and at each unit either leaves it free or starts any
// profile allowed there, so every valid layout is produced exactly once. Pure and deterministic.
#pragma once

#include <bitset>
#include <vector>

#include "gpuslice/geometry/shape.h"

namespace gpuslice::geometry {

using ProfileSet = std::bitset<kMaxProfiles>;

// Profiles without a media variant and with one memory slice per compute slice rounding
// (NVML 1/2/3/4/6/7/8_SLICE): the classic 1g/2g/3g/4g/7g set.
bool IsBaseProfile(const hw::GiProfile& profile);
ProfileSet BaseProfiles(const Shape& shape);
ProfileSet AllProfiles(const Shape& shape);

struct EnumerateOptions {
  ProfileSet profiles;  // profiles that may appear (and that maximality is judged against)
  bool maximal_only = false;
  bool include_empty = false;  // the layout with no instance
  Rules rules;
};

// Layouts sorted by start within each layout; the list is in the search's deterministic order.
std::vector<std::vector<Placed>> EnumerateLayouts(const Shape& shape,
                                                  const EnumerateOptions& options);

// True if no profile of `profiles` can be added to `occupancy`.
bool IsMaximal(const Shape& shape, const Occupancy& occupancy, const ProfileSet& profiles,
               const Rules& rules = {});

// The distinct multisets of `layouts`, in order of first appearance, with one layout index each.
struct Multiset {
  Counts counts{};
  size_t first_layout = 0;
  size_t layouts = 0;  // how many of the layouts have this multiset
};
std::vector<Multiset> DistinctMultisets(const Shape& shape,
                                        const std::vector<std::vector<Placed>>& layouts);

}  // namespace gpuslice::geometry
