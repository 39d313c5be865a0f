#pragma once
// The end of a training program's main(): LibTorch's static teardown skipped.
//
//   int main(int argc, char** argv) {
//     frugal::exit_process(frugal::run_program("my_trainer", [&] { return train(argc, argv); }));
//   }

namespace frugal {

/// Ends the process with `code` once stdout, stderr and the log are flushed, without running
/// static destructors: LibTorch's teardown (deregistering its operators) costs a process about
/// 0.1 s of CPU, which adds up where a job starts many short processes (search trials, probes,
/// tests). Call it only when everything that must be closed is gone (the Trainer joins its
/// checkpoint writer when destroyed), e.g. around run_program as above. An AddressSanitizer build
/// exits normally, so that LeakSanitizer still reports at exit; a ThreadSanitizer build exits 66
/// when it reported a race.
[[noreturn]] void exit_process(int code);

}  // namespace frugal
