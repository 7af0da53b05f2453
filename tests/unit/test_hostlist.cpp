// launch/hostlist.h: Slurm's compressed host lists (SLURM_JOB_NODELIST and friends), every form
// Slurm documents, and each malformed list refused naming the variable and quoting the list.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "launch/hostlist.h"

namespace {

using Hosts = std::vector<std::string>;

// The variable the ConfigError names, and its whole message.
std::pair<std::string, std::string> hostlist_failure(const std::string& list) {
  try {
    gradsync::expand_hostlist(list, "SLURM_JOB_NODELIST");
  } catch (const gradsync::ConfigError& e) {
    return {e.key(), e.what()};
  }
  FAIL("no ConfigError for '" << list << "'");
  return {};
}

}  // namespace

TEST_CASE("hostlist: the forms Slurm documents") {
  using gradsync::expand_hostlist;
  CHECK(expand_hostlist("cn7") == Hosts{"cn7"});
  CHECK(expand_hostlist("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("node-1.cluster,node_2") == Hosts{"node-1.cluster", "node_2"});
  // Ranges and single numbers, zero padding kept from the lower bound.
  CHECK(expand_hostlist("gpu[01-04,07]") == Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[3]") == Hosts{"n3"});
  CHECK(expand_hostlist("n[5-5]") == Hosts{"n5"});
  // Text after a group.
  CHECK(expand_hostlist("n[1-2].ib") == Hosts{"n1.ib", "n2.ib"});
  // Several groups: the cross product, the last group varying fastest.
  CHECK(expand_hostlist("rack[1-2]-node[1-2]") ==
        Hosts{"rack1-node1", "rack1-node2", "rack2-node1", "rack2-node2"});
  CHECK(expand_hostlist("r[1,3]c[0-1]n[9]") == Hosts{"r1c0n9", "r1c1n9", "r3c0n9", "r3c1n9"});
  // Mixed lists.
  CHECK(expand_hostlist("gpu[01-04,07],cpu3") ==
        Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu3"});
  CHECK(expand_hostlist("login,cn[1-2],gpu[1,3]") == Hosts{"login", "cn1", "cn2", "gpu1", "gpu3"});
  // The variable named by default.
  CHECK_THROWS_WITH(expand_hostlist("a,"), doctest::Contains("environment: hostlist: "));
}

TEST_CASE("hostlist: malformed lists name the variable and quote the list") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"gpu[01-04", "unbalanced '[' (no closing ']') in 'gpu[01-04'"},
      {"gpu01-04]", "']' without '[' in 'gpu01-04]'"},
      {"gpu[[1-2]]", "nested '[' in 'gpu[[1-2]]'"},
      {"gpu[04-01]", "descending range '04-01' in 'gpu[04-01]'"},
      {"", "empty host name (a comma at an end, or two in a row) in ''"},
      {"a,,b", "empty host name (a comma at an end, or two in a row) in 'a,,b'"},
      {",a", "empty host name (a comma at an end, or two in a row) in ',a'"},
      {"a,", "empty host name (a comma at an end, or two in a row) in 'a,'"},
      {"gpu[]", "empty range in '[]' in 'gpu[]'"},
      {"gpu[1,]", "empty range in '[1,]' in 'gpu[1,]'"},
      {"gpu[,1]", "empty range in '[,1]' in 'gpu[,1]'"},
      {"gpu[-3]", "range '-3' lacks a bound in 'gpu[-3]'"},
      {"gpu[3-]", "range '3-' lacks a bound in 'gpu[3-]'"},
      {"gpu[a-b]", "range 'a-b' is not a number or a pair of numbers in 'gpu[a-b]'"},
      {"gpu[1-2-3]", "range '1-2-3' is not a number or a pair of numbers in 'gpu[1-2-3]'"},
      {"gpu 1", "unexpected character ' ' in 'gpu 1'"},
      {"n[0-1048576]", "more than 1048576 hosts in 'n[0-1048576]'"},
      {"a[0-1023]b[0-1024]", "more than 1048576 hosts in 'a[0-1023]b[0-1024]'"},
      {"n[1234567890123456789]",
       "number '1234567890123456789' is too long in "
       "'n[1234567890123456789]'"},
  };
  for (const auto& [list, message] : cases) {
    CAPTURE(list);
    const auto [key, text] = hostlist_failure(list);
    CHECK(key == "SLURM_JOB_NODELIST");
    CHECK(text == "environment: SLURM_JOB_NODELIST: " + message);
  }
  // Exactly at the cap is fine.
  CHECK(gradsync::expand_hostlist("n[0-1048575]").size() == 1048576);
}
