// A resume's data against its checkpoint's (see the header).
#include "runtime/train/resume_data.h"

#include "runtime/data/data_identity.h"
#include "tensor/error.h"

namespace st::runtime {

std::string check_resume_data(const TrainState& st, const std::string& resume_path, const std::string& data,
                              bool data_changed) {
  if (st.data_identity.empty())
    return "--resume: " + resume_path + "/state.json records no data identity (written before it was): the data is "
           "not checked against the checkpoint's";
  const std::string now = data_identity(data);
  if (now == st.data_identity) return "";
  const std::string what = "--resume: " + resume_path + " was written reading data of " + st.data_identity +
                           "; --data " + data + " is " + now;
  ST_CHECK(data_changed, ValueError,
           what << " (other data: pass --data-changed 1 to go on with it from step " << st.step << "'s position)");
  return what + " (--data-changed 1: going on with it from step " + std::to_string(st.step) + "'s position)";
}

}  // namespace st::runtime
