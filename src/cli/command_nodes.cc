// Client commands for the allocation service's machines (reported by `gpuslice agent`):
//   gpuslice node list                       machines, their GPUs and layouts
//   gpuslice node show HOST                  one machine, with its layout and the agent's progress
//   gpuslice node set-layout HOST FILE       fix its MIG layout from a mig-parted config
//   gpuslice node clear-layout HOST          back to MIG slices made on demand
// set-layout reads FILE here (strictly: a bad file is reported with its line before anything is
// sent), picks the config (--config, else the one named HOST or gpuslice-HOST as `gpuslice plan`
// names them, else the file's only one) and sends only that config. When leases stand in the way,
// nothing changes and they are listed (exit 1).
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "client.h"
#include "common.h"
#include "gpuslice/alloc/layout.h"
#include "gpuslice/spec/mig_parted.h"

namespace gpuslice::cli {
namespace {

using nlohmann::json;

void PrintLayout(const json& layout) {
  if (layout.is_null()) {
    std::cout << "  layout: none (MIG slices are made on demand)\n";
    return;
  }
  absl::StatusOr<alloc::NodeLayout> parsed =
      alloc::LayoutFromJson(layout.value("host", ""), layout);
  std::cout << "  layout " << layout.value("generation", 0) << " from "
            << layout.value("source", "") << ", set by " << layout.value("set_by", "") << "\n";
  if (parsed.ok()) {
    for (const alloc::GpuLayout& gpu : parsed->gpus) {
      std::cout << "    GPU " << gpu.index << " " << gpu.model << ": "
                << alloc::DescribeGpuLayout(gpu) << "\n";
    }
  }
  const std::string message = layout.value("agent_message", "");
  if (layout.value("applied", false)) {
    std::cout << "  agent: carried out\n";
  } else if (!message.empty()) {
    std::cout << "  agent: NOT carried out: " << message << "\n";
  } else {
    std::cout << "  agent: not carried out yet\n";
  }
}

void PrintNode(const json& node) {
  std::cout << node.value("host", "") << ": " << node["gpus"].size() << " GPUs, last seen "
            << (EpochNow() - node.value("seen_at", std::int64_t{0})) << " s ago\n";
  for (const json& gpu : node["gpus"]) {
    std::cout << "  GPU " << gpu.value("index", 0) << " " << gpu.value("model", "") << " "
              << gpu.value("uuid", "") << (gpu.value("mig", false) ? " MIG on" : " MIG off")
              << "\n";
  }
  PrintLayout(node["layout"]);
}

// 0 accepted, 1 leases in the way (listed).
int PrintOutcome(const Reply& reply, bool json_output) {
  if (json_output) {
    PrintJson(reply.body);
    return reply.status == 409 ? kExitCheckFailed : kExitOk;
  }
  if (reply.status == 409) {
    std::cout << reply.body.value("error", "refused") << ":\n";
    for (const json& b : reply.body["blocking"]) {
      std::cout << "  lease " << b.value("lease", 0) << " (" << b.value("tenant", "") << "/"
                << b.value("user", "") << ", " << b.value("class", "") << ", \""
                << b.value("purpose", "") << "\") on GPU " << b.value("gpu", 0) << ": "
                << b.value("why", "") << "\n";
    }
    std::cout << "release or wait for these leases, then try again\n";
    return kExitCheckFailed;
  }
  if (reply.body["layout"].is_null()) {
    std::cout << "layout cleared: MIG slices are made on demand again\n";
  } else {
    std::cout << "layout set; the machine's agent (for serve's own machine, serve) carries it "
                 "out at its next round\n";
    PrintLayout(reply.body["layout"]);
  }
  return kExitOk;
}

}  // namespace

void AddNodeCommands(CLI::App& app, const GlobalOptions&, Action* action) {
  CLI::App* node = app.add_subcommand(
      "node", "Machines reported by agents, and their fixed MIG layouts (admin)");
  node->require_subcommand(1);
  {
    auto o = std::make_shared<ClientOptions>();
    CLI::App* cmd = node->add_subcommand("list", "Machines, their GPUs and layouts");
    AddConnection(cmd, *o);
    cmd->callback([o, action] {
      *action = [o] {
        Reply reply;
        if (int rc = Call(*o, "GET", "/v1/nodes", nullptr, &reply); rc != 0) return rc;
        if (o->json_output) {
          PrintJson(reply.body);
          return kExitOk;
        }
        if (reply.body["nodes"].empty()) std::cout << "no machines have reported\n";
        for (const json& n : reply.body["nodes"]) PrintNode(n);
        return kExitOk;
      };
    });
  }
  {
    struct Options {
      ClientOptions c;
      std::string host;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = node->add_subcommand("show", "One machine's layout and the agent's progress");
    AddConnection(cmd, o->c);
    cmd->add_option("host", o->host, "The machine")->required();
    cmd->callback([o, action] {
      *action = [o] {
        Reply reply;
        if (int rc = Call(o->c, "GET", "/v1/nodes/" + o->host + "/layout", nullptr, &reply);
            rc != 0) {
          return rc;
        }
        if (o->c.json_output) {
          PrintJson(reply.body);
          return kExitOk;
        }
        std::cout << o->host << ":\n";
        PrintLayout(reply.body["layout"]);
        return kExitOk;
      };
    });
  }
  {
    struct Options {
      ClientOptions c;
      std::string host;
      std::string file;
      std::string config;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = node->add_subcommand(
        "set-layout",
        "Fix a machine's MIG layout from a mig-parted config (as `gpuslice plan --out-dir` writes "
        "it); "
        "its agent carries it out, busy instances are never destroyed, and leases in the way "
        "are listed instead");
    AddConnection(cmd, o->c);
    cmd->add_option("host", o->host, "The machine")->required();
    cmd->add_option("file", o->file, "mig-parted config file (YAML or JSON)")->required();
    cmd->add_option("-c,--selected-config", o->config,
                    "Config to use, as `apply -c` (default: HOST or gpuslice-HOST, else the "
                    "file's only one)");
    // The spelling before one config option, kept for a release (hidden from --help).
    cmd->add_option("--config", o->config)->group("");
    cmd->callback([o, action] {
      *action = [o]() -> int {
        std::ifstream in(o->file);
        if (!in) {
          PrintError("cannot read " + o->file);
          return kExitBadInput;
        }
        std::stringstream text;
        text << in.rdbuf();
        absl::StatusOr<spec::MigConfigFile> file = spec::ParseMigPartedConfig(text.str(), o->file);
        if (!file.ok()) {
          PrintError(std::string(file.status().message()));
          return kExitBadInput;
        }
        std::string name = o->config;
        if (name.empty()) name = alloc::DefaultLayoutConfig(*file, o->host);
        absl::StatusOr<const std::vector<spec::ConfigEntry>*> entries =
            spec::SelectConfig(*file, name);
        if (!entries.ok()) {
          PrintError(absl::StrCat(o->file, ": ", entries.status().message()));
          return kExitBadInput;
        }
        if (name.empty()) name = file->configs.front().first;
        spec::MigConfigFile one;
        one.configs.emplace_back(name, **entries);
        json body = {{"config", spec::WriteMigPartedConfig(one, spec::OutputFormat::kYaml)},
                     {"name", name},
                     {"origin", o->file}};
        Reply reply;
        if (int rc = Call(o->c, "PUT", "/v1/nodes/" + o->host + "/layout", &body, &reply,
                          /*conflict_is_answer=*/true);
            rc != 0) {
          return rc;
        }
        return PrintOutcome(reply, o->c.json_output);
      };
    });
  }
  {
    struct Options {
      ClientOptions c;
      std::string host;
    };
    auto o = std::make_shared<Options>();
    CLI::App* cmd = node->add_subcommand(
        "clear-layout", "Drop a machine's fixed layout: MIG slices are made on demand again");
    AddConnection(cmd, o->c);
    cmd->add_option("host", o->host, "The machine")->required();
    cmd->callback([o, action] {
      *action = [o]() -> int {
        Reply reply;
        if (int rc = Call(o->c, "DELETE", "/v1/nodes/" + o->host + "/layout", nullptr, &reply,
                          /*conflict_is_answer=*/true);
            rc != 0) {
          return rc;
        }
        return PrintOutcome(reply, o->c.json_output);
      };
    });
  }
}

}  // namespace gpuslice::cli
