// placeholder: the safetensors reader/writer is being written
