"""berds.evaluate"""
