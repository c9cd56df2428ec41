// Our own .proto files (src/k8s/proto/) checked field by field against the wire facts of
// ../shared/reference/kubernetes-apis.md (§1.3 device plugin v1beta1, §2.3 pod-resources v1):
// every message and field the reference lists exists with the same number, type and cardinality,
// and the gRPC service and method names are the ones kubelet calls.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "deviceplugin_v1beta1.pb.h"
#include "podresources_v1.pb.h"
#include "require.h"

namespace gpuslice::k8s {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FieldDescriptor;

const std::string kReference = std::string(GPUSLICE_SHARED_DIR) + "/reference/kubernetes-apis.md";

struct Row {
  std::string message, field, type, label;
  int number = 0;
};

std::string Unquote(const std::string& cell) {
  std::string text(absl::StripAsciiWhitespace(cell));
  if (text.size() >= 2 && text.front() == '`' && text.back() == '`') {
    text = text.substr(1, text.size() - 2);
  }
  return text;
}

// The rows with a field number of the table under `heading` (up to the next heading).
std::vector<Row> ReferenceRows(const std::string& heading) {
  std::ifstream in(kReference);
  std::string line;
  bool inside = false;
  std::string message;
  std::vector<Row> rows;
  while (std::getline(in, line)) {
    if (line.starts_with("### ")) {
      inside = line.starts_with(heading);
      continue;
    }
    if (!inside || !line.starts_with("|")) continue;
    std::vector<std::string> cells = absl::StrSplit(line, '|');
    if (cells.size() < 6) continue;
    const std::string name = Unquote(cells[1]);
    if (!name.empty() && name != "Message" && !name.starts_with("---")) message = name;
    Row row;
    row.message = message;
    row.field = Unquote(cells[2]);
    row.type = Unquote(cells[3]);
    row.label = std::string(absl::StripAsciiWhitespace(cells[5]));
    const std::string number(absl::StripAsciiWhitespace(cells[4]));
    if (number.empty() || !std::all_of(number.begin(), number.end(), absl::ascii_isdigit)) continue;
    if (row.field.empty() || row.field.find(' ') != std::string::npos) continue;  // "(1 reserved…"
    row.number = std::stoi(number);
    rows.push_back(row);
  }
  return rows;
}

void CheckRows(const std::vector<Row>& rows, const DescriptorPool& pool,
               const std::string& package) {
  for (const Row& row : rows) {
    SCOPED_TRACE(row.message + "." + row.field);
    const Descriptor* message = pool.FindMessageTypeByName(package + "." + row.message);
    ASSERT_NE(message, nullptr);
    const FieldDescriptor* field = message->FindFieldByName(row.field);
    ASSERT_NE(field, nullptr);
    EXPECT_EQ(field->number(), row.number);
    if (row.type.starts_with("map<")) {
      EXPECT_TRUE(field->is_map());
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      EXPECT_EQ(field->message_type()->name(), row.type);
    } else {
      EXPECT_EQ(field->type_name(), row.type);
    }
    EXPECT_EQ(field->is_repeated() && !field->is_map(),
              row.label.find("repeated") != std::string::npos);
  }
}

class ProtoFieldsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream(kReference)) GPUSLICE_SKIP_OR_FAIL_IN_CI(kReference << " is not here");
  }
};

TEST_F(ProtoFieldsTest, DevicePluginMessagesMatchTheReference) {
  const std::vector<Row> rows = ReferenceRows("### 1.3");
  ASSERT_GE(rows.size(), 25u) << "the reference table was not found";
  CheckRows(rows, *v1beta1::Device::descriptor()->file()->pool(), "v1beta1");
}

TEST_F(ProtoFieldsTest, PodResourcesMessagesMatchTheReference) {
  const std::vector<Row> rows = ReferenceRows("### 2.3");
  ASSERT_GE(rows.size(), 25u) << "the reference table was not found";
  CheckRows(rows, *v1::PodResources::descriptor()->file()->pool(), "v1");
}

TEST(ProtoServices, NamesAreTheOnesKubeletCalls) {
  const auto* file = v1beta1::Device::descriptor()->file();
  ASSERT_NE(file->FindServiceByName("Registration"), nullptr);
  EXPECT_EQ(file->FindServiceByName("Registration")->full_name(), "v1beta1.Registration");
  const auto* plugin = file->FindServiceByName("DevicePlugin");
  ASSERT_NE(plugin, nullptr);
  for (const char* method : {"GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation",
                             "Allocate", "PreStartContainer"}) {
    EXPECT_NE(plugin->FindMethodByName(method), nullptr) << method;
  }
  EXPECT_TRUE(plugin->FindMethodByName("ListAndWatch")->server_streaming());
  const auto* lister =
      v1::PodResources::descriptor()->file()->FindServiceByName("PodResourcesLister");
  ASSERT_NE(lister, nullptr);
  EXPECT_EQ(lister->full_name(), "v1.PodResourcesLister");
  for (const char* method : {"List", "GetAllocatableResources", "Get"}) {
    EXPECT_NE(lister->FindMethodByName(method), nullptr) << method;
  }
}

}  // namespace
}  // namespace gpuslice::k8s
