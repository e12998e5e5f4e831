// placeholder: viz being written
