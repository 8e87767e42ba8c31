"""berds.evaluate.analyses"""
