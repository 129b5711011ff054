/* not an nccl.h: no version defines */
