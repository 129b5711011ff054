#define NCCL_MAJOR 2
#define NCCL_MINOR 12
#define NCCL_PATCH 10
