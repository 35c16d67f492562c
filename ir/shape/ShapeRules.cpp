// ir/shape/ShapeRules.cpp (in progress)
