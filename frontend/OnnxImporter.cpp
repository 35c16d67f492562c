// frontend/OnnxImporter.cpp (in progress)
