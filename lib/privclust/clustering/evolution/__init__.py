"""evolution"""
