// Ctrl-C while a command trains (issue 25 item 1).
//
// The first SIGINT asks the training loop to stop once the step it is in is complete
// (train::request_stop); the command then saves that step and prints the command that
// resumes it, and exits with status 130. A second SIGINT exits at once (130), also once the
// TrainingInterrupt is gone and the command is saving or exiting, leaving the last complete
// save: folders are replaced whole (io::StagedFolder) and files renamed into place, so a save
// is never half there. Outside a TrainingInterrupt, SIGINT keeps its
// default action (the process ends; an output not yet committed is simply not there).
#pragma once

namespace qkv::tool {

class TrainingInterrupt {
 public:
  TrainingInterrupt();   // installs the handler (and clears an earlier request), if allowed
  ~TrainingInterrupt();  // restores the previous action; after a Ctrl-C, a second one still exits 130
  TrainingInterrupt(const TrainingInterrupt&) = delete;
  TrainingInterrupt& operator=(const TrainingInterrupt&) = delete;

  // True once a Ctrl-C asked the run to stop.
  static bool requested();
};

// false: TrainingInterrupt installs nothing, so Ctrl-C ends the process at once (the demo,
// whose folder is only committed when every part succeeded). Default true.
void allow_training_interrupt(bool allow);

// The exit status of a command stopped by Ctrl-C (128 + SIGINT, as shells report it).
inline constexpr int kInterruptedExit = 130;

}  // namespace qkv::tool
