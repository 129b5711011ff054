# reads data/missing_data.txt
x = "#core/not_a_comment.h"  # but this names core/present.h
