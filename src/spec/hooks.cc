#include "gpuslice/spec/hooks.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <span>

#include "absl/status/status.h"
#include "gpuslice/util/yaml_reader.h"
#include "yaml-cpp/yaml.h"

namespace gpuslice::spec {
namespace {

using util::ThrowYamlError;
using util::YamlMap;

// Rejects non-scalar keys, duplicate keys (yaml-cpp keeps both) and keys outside `known`.
void CheckKeys(const YAML::Node& map, std::string_view origin, const std::string& path,
               std::span<const std::string_view> known) {
  std::set<std::string, std::less<>> seen;
  const std::string prefix = path.empty() ? "" : path + ".";
  for (auto it = map.begin(); it != map.end(); ++it) {
    if (!it->first.IsScalar()) ThrowYamlError(origin, it->first, path, "keys must be text");
    const std::string key = it->first.Scalar();
    if (!known.empty() && std::find(known.begin(), known.end(), key) == known.end()) {
      std::string expected;
      for (std::string_view name : known) {
        if (!expected.empty()) expected += ", ";
        expected += name;
      }
      ThrowYamlError(origin, it->first, prefix + key, "unknown field (expected " + expected + ")");
    }
    if (!seen.insert(key).second) ThrowYamlError(origin, it->first, prefix + key, "duplicate key");
  }
}

constexpr std::string_view kTopKeys[] = {"version", "hooks"};
constexpr std::string_view kCommandKeys[] = {"command", "args", "envs", "workdir"};

HookCommand ReadCommand(const YAML::Node& node, std::string_view origin, const std::string& path) {
  if (!node.IsMap()) {
    ThrowYamlError(origin, node, path, "expected a mapping with command, args, envs and workdir");
  }
  CheckKeys(node, origin, path, kCommandKeys);
  YamlMap map(node, origin, path);
  HookCommand command;
  command.command = map.String("command");
  if (command.command.empty()) map.Fail("command", "must not be empty");
  command.args = map.StringList("args");
  const YAML::Node envs = map.OptionalNode("envs");
  if (envs.IsDefined() && !envs.IsNull()) {
    const std::string envs_path = map.PathOf("envs");
    if (!envs.IsMap()) {
      ThrowYamlError(origin, envs, envs_path,
                     "expected a mapping of variable name to value, e.g. {NAME: value}");
    }
    CheckKeys(envs, origin, envs_path, {});
    for (auto it = envs.begin(); it != envs.end(); ++it) {
      const std::string key = it->first.Scalar();
      const std::string item_path = envs_path + "." + key;
      if (key.empty() || key.find('=') != std::string::npos) {
        ThrowYamlError(origin, it->first, item_path,
                       "invalid environment variable name '" + key + "'");
      }
      const std::string value =
          it->second.IsNull() ? "" : util::YamlString(it->second, origin, item_path);
      command.envs.push_back(key + "=" + value);
    }
  }
  command.workdir = map.String("workdir", "");
  map.Finish();
  return command;
}

HooksFile ReadHooks(const YAML::Node& root, std::string_view origin) {
  if (!root.IsMap()) {
    ThrowYamlError(origin, root, "", "expected a mapping with 'version: v1' and 'hooks'");
  }
  CheckKeys(root, origin, "", kTopKeys);
  YamlMap top(root, origin, "");
  const YAML::Node version = top.Node("version");
  const std::string version_text = util::YamlString(version, origin, "version");
  if (version_text != "v1") {
    ThrowYamlError(
        origin, version, "version",
        "unsupported version '" + version_text + "' (mig-parted's hooks format is version v1)");
  }
  const YAML::Node hooks = top.Node("hooks");
  if (!hooks.IsMap()) {
    ThrowYamlError(origin, hooks, "hooks", "expected a mapping of hook name to commands");
  }
  CheckKeys(hooks, origin, "hooks", kHookNames);
  HooksFile file;
  for (auto it = hooks.begin(); it != hooks.end(); ++it) {
    const std::string name = it->first.Scalar();
    const std::string path = "hooks." + name;
    std::vector<HookCommand> commands;
    if (!it->second.IsNull()) {
      if (!it->second.IsSequence()) {
        ThrowYamlError(origin, it->second, path, "expected a list of commands");
      }
      for (size_t i = 0; i < it->second.size(); ++i) {
        commands.push_back(
            ReadCommand(it->second[i], origin, path + "[" + std::to_string(i) + "]"));
      }
    }
    file.hooks.emplace_back(name, std::move(commands));
  }
  top.Finish();
  return file;
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buffer[8];
      std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
      out += buffer;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

absl::StatusOr<HooksFile> ParseHooksFile(std::string_view text, std::string_view origin) {
  return util::GuardParse<HooksFile>(
      origin, [&] { return ReadHooks(YAML::Load(std::string(text)), origin); });
}

std::string WriteHooksFile(const HooksFile& hooks) {
  std::string out = "version: v1\nhooks:";
  if (hooks.hooks.empty()) return out + " {}\n";
  out += "\n";
  for (const auto& [name, commands] : hooks.hooks) {
    out += "  " + name + ":";
    if (commands.empty()) {
      out += " []\n";
      continue;
    }
    out += "\n";
    for (const HookCommand& command : commands) {
      out += "    - command: " + Quote(command.command) + "\n";
      if (!command.args.empty()) {
        std::string list;
        for (const std::string& arg : command.args) {
          if (!list.empty()) list += ", ";
          list += Quote(arg);
        }
        out += "      args: [" + list + "]\n";
      }
      if (!command.envs.empty()) {
        out += "      envs:\n";
        for (const std::string& env : command.envs) {
          const size_t equals = env.find('=');
          const std::string_view key = std::string_view(env).substr(0, equals);
          const std::string_view value = equals == std::string::npos
                                             ? std::string_view()
                                             : std::string_view(env).substr(equals + 1);
          out += "        " + Quote(key) + ": " + Quote(value) + "\n";
        }
      }
      if (!command.workdir.empty()) out += "      workdir: " + Quote(command.workdir) + "\n";
    }
  }
  return out;
}

}  // namespace gpuslice::spec
