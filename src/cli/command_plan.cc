// stub
#include "common.h"
