// `cgdr`: the command table (SPEC 7). Each command's name, its lines in
// `cgdr help`, and the function that runs it (commands.h); the hidden test
// helpers have no lines. Thin: every step lives in the commands' files and
// the library.
#include <cstdio>
#include <string>

#include "cgdr/cgdr.hpp"
#include "commands.h"
#include "core/strcat.h"
#include "io/safetensors.h"

namespace cgdr::cli {
namespace {

struct Command {
  const char* name;
  int (*main)(int, char**);
  const char* help;  // its lines in `cgdr help`; null: hidden
};

constexpr Command kCommands[] = {
    {"run", RunMain,
     "  run    --input CASE.safetensors --output RESULT.safetensors [--threads N]\n"
     "         [--algo auto|recurrent|chunk16|chunk32|chunk64] [--precision auto|fp32|bf16|bf16x3|bf16x4]\n"
     "         [--engine auto|vector|amx|amx-emu] [--checkpoint-every E] [--check-values] [--quiet] [--print-plan]\n"
     "         Run one case file (SPEC 7) and write `out` and `final_state` atomically: a prefill case\n"
     "         (seq_lens; state pools, checkpoints), or a decode/verify case (no seq_lens; SPEC 6d).\n"},
    {"plan", PlanMain,
     "  plan   --t T --nk NK --nv NV --dk DK --dv DV [--b B] [--threads N]\n"
     "         [--dtype f16|bf16|f32] [--algo ...] [--precision ...] [--engine ...] [--per-channel-gate]\n"
     "         Print the plan for a shape (B sequences splitting T evenly).\n"},
    {"bench", BenchMain,
     "  bench  [--shape ROW] [--t T] [--threads N] [--json FILE] ...\n"
     "         Benchmark (SPEC 8); see 'cgdr bench --help'.\n"},
    {"tune", TuneMain, "  tune   Calibrate the planner's cost model; see 'cgdr tune --help'.\n"},
    {"demo", DemoMain,
     "  demo   [--t T] [--threads N] [--algo ...] [--dir DIR]\n"
     "         A synthetic Qwen3-Next case (Nk=16 Nv=32 Dk=Dv=128 f16, T=2048): write it, run it as\n"
     "         'cgdr run' does, time it against the FP32 peak and the recurrent form, check it vs FP64.\n"},
    {"golden", GoldenMain,
     "  golden --input CASE --out DIR | --generate [--dist ...] --out DIR\n"
     "         Golden and benchmark (the NPU's precision profile) results of a case in its own file\n"
     "         kind (safetensors, .npy directory, .bin manifest); see 'cgdr golden --help'.\n"},
    {"compare", CompareMain,
     "  compare --golden G --benchmark B --actual A [--case CASE] [--level L1] [--json]\n"
     "         The verdict on an NPU result by Ascend's precision standard; see 'cgdr compare --help'.\n"},
    {"make-case", MakeCaseMain, nullptr},
    {"check", CheckMain, nullptr},
    {"flags", FlagsMain, nullptr},
};

const char kUsageHead[] =
    "usage: cgdr <command> [flags]      cgdr help <command>      cgdr --version\n"
    "\n"
    "commands:\n";
const char kUsageTail[] =
    "  help   This text; 'cgdr help COMMAND' (or 'cgdr COMMAND --help') for one command.\n"
    "\n"
    "exit status: 0 success; 1 a check failed; 2 bad input or usage, with one line on stderr\n"
    "(cgdr: error: ...) and no output file written.\n";

const Command* FindCommand(const std::string& name) {
  for (const auto& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// The commands `cgdr help` lists: "run, plan, ...".
std::string ListedNames() {
  std::string names;
  for (const auto& c : kCommands) {
    if (c.help != nullptr) names += (names.empty() ? "" : ", ") + std::string(c.name);
  }
  return names;
}

// `cgdr help [COMMAND]`: the overview, or the command's own --help.
int HelpMain(int argc, char** argv) {
  if (argc == 0) {
    std::fputs(kUsageHead, stdout);
    for (const auto& c : kCommands) {
      if (c.help != nullptr) std::fputs(c.help, stdout);
    }
    std::fputs(kUsageTail, stdout);
    return kExitOk;
  }
  const Command* c = FindCommand(argv[0]);
  if (argc > 1 || c == nullptr) {
    return ReportError(Status::Invalid(Cat("'cgdr help' takes one command name (", ListedNames(), "), got '",
                                           PrintableName(argc > 1 ? argv[1] : argv[0]), "'")));
  }
  char help_flag[] = "--help";
  char* args[] = {help_flag, nullptr};
  return c->main(1, args);
}

}  // namespace
}  // namespace cgdr::cli

int main(int argc, char** argv) {
  using namespace cgdr::cli;
  if (argc < 2) return ReportError(cgdr::Status::Invalid("no command given (try 'cgdr --help')"));
  const std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") return HelpMain(argc - 2, argv + 2);
  if (cmd == "--version" || cmd == "version") {
    std::printf("cgdr %s\n", CGDR_VERSION_STRING);
    return kExitOk;
  }
  if (const Command* c = FindCommand(cmd)) return c->main(argc - 2, argv + 2);
  return ReportError(cgdr::Status::Invalid("unknown command '" + cmd + "' (try 'cgdr --help')"));
}
