// Slurm's hostlist syntax, the compressed node lists in SLURM_JOB_NODELIST and
// SLURM_STEP_NODELIST (and what `scontrol show hostnames` expands):
//
//   expand_hostlist("gpu[01-03,07],cpu3")   // gpu01 gpu02 gpu03 gpu07 cpu3
//   expand_hostlist("rack[1-2]-node[1-2]")  // rack1-node1 rack1-node2 rack2-node1 rack2-node2
//
// The forms Slurm documents, all supported:
//   - plain names and comma lists:  a,b,c
//   - a bracket group of ranges and single numbers:  gpu[01-04,07]. A number is printed with
//     as many digits as the range's lower bound has, so zero padding is kept (gpu01..gpu04,
//     gpu07) and [8-10] gives 8 9 10
//   - several bracket groups in one name:  rack[1-2]-node[1-2], the cross product with the
//     last group varying fastest (the order Slurm lists them in)
//   - mixed lists:  gpu[01-04,07],cpu3 (commas inside brackets separate ranges, commas outside
//     separate names)
// Pure function, thread-safe.
#pragma once

#include <string>
#include <vector>

namespace gradsync {

// Every host of `hostlist`, in order. Throws gradsync::ConfigError("environment", variable,
// ...) quoting the list for malformed input: an unbalanced or nested bracket, a descending
// range (gpu[4-1]), an empty element (a,,b / gpu[] / gpu[1,]), a non-number inside brackets,
// a character no host name has, or a list that expands to more than 1,048,576 hosts.
std::vector<std::string> expand_hostlist(const std::string& hostlist,
                                         const std::string& variable = "hostlist");

}  // namespace gradsync
