// Whether a resume reads the data its checkpoint was trained on. A checkpoint's state.json holds
// the data's identity (TrainState::data_identity, runtime/data/data_identity.h); a resume given
// other data (shifted, another size, another corpus) would go on from the checkpoint's position in
// tokens it never saw, without a word. So:
//   the same identity              → "" (nothing to say)
//   another, data_changed false    → ValueError, one line:
//     --resume: CKPT was written reading data of 1048576 bytes, sample 3f…; --data d.bin is 524288 bytes, sample 9a… (other data: pass --data-changed 1 to go on with it from step 4's position)
//   another, data_changed true     → a note that says so
//   none recorded (older files)    → a note: the data cannot be checked
#pragma once
#include <string>

#include "runtime/train/train_checkpoint.h"

namespace st::runtime {

// `data`: the run's --data. Returns the note to print (rank 0), "" for none.
std::string check_resume_data(const TrainState& st, const std::string& resume_path, const std::string& data,
                              bool data_changed);

}  // namespace st::runtime
